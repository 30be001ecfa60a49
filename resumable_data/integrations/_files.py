"""The loader's state as a JSON file inside a framework's checkpoint folder.

Algorithm. ``rd.DataLoader.state_dict()`` is already a small JSON document with ``format`` and
``schema_version``; :func:`write_loader_state` writes it atomically (temporary file, fsync,
rename) as ``rd_loader_state.json`` in the folder, and :func:`read_loader_state` reads it back
with ``json`` (never pickle). The loader validates it on ``load_state_dict``.

Guarantee. A reader sees a whole state or none: a kill during the write leaves the previous file
(or no file), never half of one. A folder without the file is refused with a message naming the
folder and the fix, never silently read as a fresh start.

Cost. A few hundred bytes written and read per checkpoint.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from resumable_data._io import atomic_write
from resumable_data.errors import ConfigError, ResumeError, describe

__all__ = ["LOADER_STATE_FILE", "check_pinned", "read_loader_state", "write_loader_state"]

#: Name of the loader-state file inside a checkpoint folder.
LOADER_STATE_FILE = "rd_loader_state.json"


def write_loader_state(folder: str | os.PathLike, state: dict[str, Any]) -> Path:
    """Write ``state`` (a loader's ``state_dict()``) as ``folder/rd_loader_state.json``, atomically."""
    os.makedirs(folder, exist_ok=True)
    data = json.dumps(state, sort_keys=True, separators=(",", ":")).encode()
    return atomic_write(Path(folder) / LOADER_STATE_FILE, data, durable=True)


def read_loader_state(folder: str | os.PathLike) -> dict[str, Any]:
    """The state written by :func:`write_loader_state` in ``folder``; :class:`rd.ResumeError` when
    the folder holds none or the file is not a JSON object."""
    path = Path(folder) / LOADER_STATE_FILE
    if not path.is_file():
        raise ResumeError(
            describe(
                "resume_from_checkpoint",
                str(folder),
                f"a checkpoint folder holding {LOADER_STATE_FILE} (written by rd's integration at every save)",
                "resume from a checkpoint saved by the rd integration (an earlier "
                "one if this save was interrupted), or start fresh without resume_from_checkpoint",
            )
        )
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ResumeError(
            describe(str(path), f"unreadable ({e})", "a JSON loader state", "resume from an earlier checkpoint")
        ) from e
    if not isinstance(state, dict):
        raise ResumeError(
            describe(
                str(path), type(state).__name__, "a JSON object (a loader state)", "resume from an earlier checkpoint"
            )
        )
    return state


def check_pinned(loader: Any, allow_unpinned: bool, where: str) -> None:
    """Refuse, at construction, a loader whose dataset has no pinned version unless
    ``allow_unpinned``: its first resume would be refused (nothing could tell a changed dataset),
    so the run must not train first and learn it at the first restart."""
    if not isinstance(allow_unpinned, bool):
        raise ConfigError(
            describe(
                "allow_unpinned",
                allow_unpinned,
                "True or False",
                f"pass allow_unpinned=True to {where} to resume over an unpinned dataset",
            )
        )
    if allow_unpinned or loader.snapshot().pinned:
        return
    raise ConfigError(
        describe(
            "dataset",
            type(loader.dataset).__name__,
            "a dataset with a pinned version (an rd.ArrowShards, a "
            "datasets.Dataset, or a torch dataset with dataset_version=): a resume checks that the data did not change",
            f"pass dataset_version='<a name for this data>' to rd.DataLoader (or to {where}'s loader arguments), use "
            f"rd.ArrowShards, or pass allow_unpinned=True to {where} to resume without that check",
        )
    )
