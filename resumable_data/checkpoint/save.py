"""Writing a checkpoint: :func:`save_checkpoint`, atomic on a local file system (layout, recovery
and reading: :mod:`.store`).

Algorithm (under the folder's single-writer lock, ``.lock``: a second concurrent writer
gets a :class:`CheckpointError`): recover or remove leftovers of interrupted saves (below); write
every file into ``.tmp-step-N-<pid>-<rand>/`` (each fsynced); write ``COMMITTED`` (fsynced); fsync
the directory; rename an existing ``step-N`` aside to ``.aside-step-N-<rand>``; rename the new
directory to ``step-N``; fsync the parent; replace ``latest`` atomically (``_io.atomic_write``,
durable); delete the aside copy; finally delete all but the ``keep_last`` newest complete
checkpoints (never the one just saved, which ``latest`` names), each renamed to ``.trash-*``
before it is removed. A step below the newest complete one is refused before anything is written
(it would be ``latest`` but not the newest step, and ``rd.resume_or_start`` and retention go by
step): after a rollback, remove the abandoned later steps first.

Write failures (a full disk, a quota, an I/O error: ``OSError`` or safetensors' ``SafetensorError``)
are a :class:`CheckpointError` naming the folder, the cause and what is on disk: before the new
directory is renamed into place, the temp directory is removed (and a re-saved step's previous
copy renamed back), so the folder is as it was; after it, the step is complete but ``latest``
may still name the previous one, which loading follows. Retention is best effort (the next save
retries it).

Guarantee: see :mod:`.store` (a process killed at any instant leaves ``latest`` naming a complete
checkpoint); a state the codec cannot hold exactly is refused before anything is written. Cost: the
state written once, one fsync per file and two of directories.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from resumable_data._io import atomic_write, fsync_dir
from resumable_data.checkpoint.codec import encode
from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.checkpoint.files import hash_regular, writer_lock
from resumable_data.checkpoint.meta import new_id
from resumable_data.checkpoint.store import (
    ASIDE_PREFIX,
    CHECKPOINT_FORMAT,
    CHECKPOINT_SCHEMA_VERSION,
    FILES,
    INVENTORY_JSON,
    K_CHECKPOINT_ID,
    K_FILES,
    K_STEP,
    LATEST,
    MARKER,
    META_JSON,
    STATE_JSON,
    STEP_RE,
    TENSORS,
    TENSORS_METADATA,
    TMP_PREFIX,
    TRASH_PREFIX,
    _cleanup,
    _json_bytes,
    _path,
    _rmtree,
    _tree_meta,
    check_step,
    list_checkpoints,
    step_dir_name,
    survey_checkpoints,
)
from resumable_data.errors import ConfigError, describe
from resumable_data.loader.protocol import HoldsLoader, ResumableLoader

__all__ = ["SavesState", "save_checkpoint"]


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_tensors(path: Path, tensors: dict) -> None:
    from safetensors.torch import save_file

    save_file(tensors, str(path), metadata=TENSORS_METADATA)


@runtime_checkable
class SavesState(Protocol):
    """What :func:`save_checkpoint` needs of a state that is not a :class:`TrainingState`: a
    ``state_dict()`` of tensors and JSON values (torch's ``Stateful`` has one; restoring it with
    ``rd.load_checkpoint`` also needs ``load_state_dict``, reading it with ``read_checkpoint`` does not)."""

    def state_dict(self) -> Any: ...


def save_checkpoint(
    directory: str | os.PathLike, state: Any, *, step: int | None = None, keep_last: int | None = 3
) -> Path:
    """Write ``state`` (a :class:`TrainingState` or any object whose ``state_dict()`` holds tensors
    and JSON values) as ``directory/step-N`` atomically; returns that path.

    ``step`` (``0 <= step < 10**12``) defaults to the loader's delivered-step cursor;
    ``keep_last=None`` keeps every checkpoint. One writer per directory: a second process saving
    into it concurrently gets a :class:`CheckpointError` (module docs).

    Single process only: with torch.distributed initialized and more than one rank this raises
    :class:`ConfigError` before writing anything. Several ranks writing one directory would race on
    ``latest`` and the retention, and one rank's file cannot hold the other ranks' generators and
    cursors; save through ``torch.distributed.checkpoint`` with :class:`TrainingState` instead
    (``dcp.save({"train": state}, checkpoint_id=path)`` on every rank), which keeps each rank's state."""
    from resumable_data.checkpoint.census import build_inventory
    from resumable_data.checkpoint.state import TrainingState

    dist = __import__("torch").distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        raise ConfigError(
            describe(
                "torch.distributed world_size",
                dist.get_world_size(),
                "a single process (rd.save_checkpoint writes one process's state into a directory with one writer)",
                "on every rank call torch.distributed.checkpoint.save({'train': rd.TrainingState(...)}, checkpoint_id=path) "
                "and dcp.load(...) to resume: it keeps every rank's RNG and data cursor",
            )
        )
    root = _path(directory, "directory")
    if step is None:
        loader = state.loader if isinstance(state, HoldsLoader) else None
        if not isinstance(loader, ResumableLoader):
            raise ConfigError(
                describe(
                    "step",
                    None,
                    "an integer step (it defaults to the delivered-step cursor of state.loader, an rd.DataLoader;"
                    f" {type(state).__name__} has none)",
                    "pass step= (e.g. the applied-update count)",
                )
            )
        step = int(loader.cursor.delivered)
    step = check_step(step)
    if keep_last is not None and (isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1):
        raise ConfigError(
            describe("keep_last", keep_last, "an integer >= 1 or None", "pass keep_last=3, or None to keep all")
        )
    checkpoint_id = new_id()
    if isinstance(state, TrainingState):
        tree = state.file_state_dict(checkpoint_id=checkpoint_id)
        inventory = build_inventory(state, tree).to_dict()
    else:
        if not isinstance(state, SavesState):
            raise ConfigError(
                describe(
                    "state",
                    type(state).__name__,
                    "an rd.TrainingState or an object with state_dict() (torch's Stateful has it)",
                    "wrap the training objects in rd.TrainingState",
                )
            )
        tree = state.state_dict()
        inventory = {"format": "resumable_data.inventory", "schema_version": 1, "entries": []}
    meta = _tree_meta(tree)
    json_tree, tensors = encode(tree)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CheckpointError(
            describe("directory", str(root), f"a folder that can be created ({e})", "pass a writable directory")
        ) from None
    with writer_lock(root):
        return _write(root, step, checkpoint_id, json_tree, tensors, meta, inventory, keep_last)


def _write(
    root: Path,
    step: int,
    checkpoint_id: str,
    json_tree: Any,
    tensors: dict,
    meta: Any,
    inventory: Any,
    keep_last: int | None,
) -> Path:
    from safetensors import SafetensorError

    final = root / step_dir_name(step)
    tmp = root / f"{TMP_PREFIX}{final.name}-{os.getpid()}-{secrets.token_hex(4)}"
    aside = None
    try:  # nothing published yet: any failure removes what this save wrote and leaves the folder as it was
        _check_no_damaged(root)
        _cleanup(root)
        _check_not_behind(root, step)
        _fill(tmp, step, checkpoint_id, json_tree, tensors, meta, inventory)
        if os.path.lexists(final):
            aside = root / f"{ASIDE_PREFIX}{final.name}-{secrets.token_hex(4)}"
            os.rename(final, aside)
        os.rename(tmp, final)
    except BaseException as e:  # also an interrupt or a writer's bug: what this save wrote goes
        _rmtree(tmp)
        if aside is not None and not os.path.lexists(final):
            with contextlib.suppress(OSError):  # else the next load or save recovers the complete aside copy
                os.rename(aside, final)  # a re-save: the previous copy of this step goes back
        if isinstance(e, (OSError, SafetensorError)):
            raise _write_error(root, final, e, published=False) from None
        raise
    try:  # the new step directory is complete; `latest` and the retention pass follow
        fsync_dir(root)
        atomic_write(root / LATEST, (final.name + "\n").encode(), durable=True)
    except OSError as e:
        raise _write_error(root, final, e, published=True) from None
    if aside is not None:
        _rmtree(aside)
    if keep_last is not None:
        for old in list_checkpoints(root)[:-keep_last]:
            if old.name != final.name:
                trash = root / f"{TRASH_PREFIX}{old.name}-{secrets.token_hex(4)}"
                try:
                    os.rename(old, trash)
                except OSError:  # retention is best effort: the next save retries it
                    continue
                _rmtree(trash)
    return final


def _check_no_damaged(root: Path) -> None:
    """A save is refused while a step directory newer than every complete checkpoint holds a marker
    but is not complete (a checkpoint that was complete once, now damaged or truncated): the save's
    cleanup would delete it, and ``rd.resume_or_start`` refuses that folder for the same reason."""
    newest, damaged = survey_checkpoints(root)
    if damaged:
        name, why = next(reversed(damaged.items()))
        raise CheckpointError(
            describe(
                "directory",
                str(root),
                f"no damaged checkpoint newer than the complete ones ({sorted(damaged)} "
                f"{'is' if len(damaged) == 1 else 'are'} newer than {newest.name if newest else 'any complete one'} "
                f"and not complete: {name}: {why}; this save would delete it)",
                f"restore {name} from a copy; or move it out of {root} and save again (or save into another directory)",
            )
        )


def _check_not_behind(root: Path, step: int) -> None:
    """A save below the newest complete step is refused: it would be the newest save (``latest``) but
    not the newest step, so ``rd.load_checkpoint`` would read it while ``rd.resume_or_start`` and
    retention (both by step) kept the later, abandoned branch."""
    steps = {p.name: int(m.group(1)) for p in list_checkpoints(root) if (m := STEP_RE.match(p.name))}
    later = [name for name, s in steps.items() if s > step]
    if later:
        first = steps[later[-1]]
        raise CheckpointError(
            describe(
                "step",
                step,
                f"at least {first}, the newest checkpoint's step in {str(root)!r} (a lower step would be the "
                "latest save but not the newest step: rd.resume_or_start would resume the newer one, "
                "rd.load_checkpoint this one, and retention would delete the new ones first)",
                f"after rolling back to an older checkpoint, remove the later ones the run abandoned first "
                f"({', '.join(later[:4])}{' ...' if len(later) > 4 else ''}: e.g. shutil.rmtree on each), "
                f"or save to another directory, or pass step= of at least {first}",
            )
        )


def _fill(tmp: Path, step: int, checkpoint_id: str, json_tree: Any, tensors: dict, meta: Any, inventory: Any) -> None:
    """Write every file of a checkpoint and its marker into the private directory ``tmp``, durably."""
    os.mkdir(tmp)
    _write_tensors(tmp / TENSORS, tensors)
    # inside the private temp dir nobody reads: plain writes, then one fsync per file and one of the dir
    atomic_write(tmp / STATE_JSON, _json_bytes(json_tree, sort_keys=False), durable=False)  # dict order is state
    atomic_write(tmp / META_JSON, _json_bytes(meta), durable=False)
    atomic_write(tmp / INVENTORY_JSON, _json_bytes(inventory), durable=False)
    files = {}
    for n in FILES:
        _fsync_file(tmp / n)
        size = os.lstat(tmp / n).st_size
        files[n] = {"size": size, "xxh3_128": hash_regular(tmp / n, size)}
    atomic_write(
        tmp / MARKER,
        _json_bytes(
            {
                "format": CHECKPOINT_FORMAT,
                "schema_version": CHECKPOINT_SCHEMA_VERSION,
                K_STEP: step,
                K_CHECKPOINT_ID: checkpoint_id,
                K_FILES: files,
            }
        ),
        durable=False,
    )
    _fsync_file(tmp / MARKER)
    fsync_dir(tmp)


def _write_error(root: Path, final: Path, e: BaseException, *, published: bool) -> CheckpointError:
    """The error of a save that failed writing (a full disk, a quota, an I/O error), saying what is on disk."""
    why = getattr(e, "strerror", None) or str(e)
    if published:
        state = (
            f"{final.name} is complete on disk but {LATEST} was not updated; loading {root} (rd.load_checkpoint, "
            "rd.resume_or_start) loads it, the newest step"
        )
    else:
        state = f"nothing of {final.name} was kept; the checkpoints saved before are unchanged"
    return CheckpointError(
        describe(
            "directory",
            str(root),
            f"room to write checkpoint {final.name} ({why}; {state})",
            "free space (or raise the quota) and call save_checkpoint again, or save into another directory",
        )
    )
