"""Atomic, never-unpickling checkpoints on a local file system.

Layout of ``directory``::

    latest                      # text: the name of the newest complete step directory
    step-000000000012/
        tensors.safetensors     # every tensor of the state (safetensors: no code, no pickle)
        state.json              # the rest of the state; tensors appear as {"__tensor__": name}
        meta.json               # CheckpointMeta (what check_compatible compares)
        inventory.json          # the inventory table with its oracle values
        COMMITTED               # written last: format, step, checkpoint id, size + xxh3-128 of each file

Save algorithm: remove leftovers of interrupted saves (``.tmp-*``, ``.trash-*``); write every
file into ``.tmp-step-N-<pid>-<rand>/`` and fsync it; write ``COMMITTED`` and fsync it; fsync the
directory; rename it to ``step-N`` (an existing ``step-N`` is first renamed aside); fsync the
parent; then replace ``latest`` atomically (write ``.latest.tmp``, fsync, ``os.replace``, fsync
the parent); finally delete all but the ``keep_last`` newest complete checkpoints (never the one
``latest`` names).

Guarantee: a process killed at any instant leaves ``latest`` naming a complete checkpoint (or no
``latest`` before the first save completes); a directory without a valid ``COMMITTED`` marker is
never loaded; if ``latest`` is missing or names an incomplete directory, the newest complete step
directory is loaded instead (with a warning). Loading checks every file's size and xxh3-128 and
never unpickles: tensors come from safetensors, everything else from JSON. One writer per
directory (ranks of a distributed job use ``torch.distributed.checkpoint`` with
:class:`TrainingState` instead).

Cost: save writes the state once plus fsyncs; load reads and hashes it once.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

from resumable_data._schema import check_int, expect_header, expect_int, expect_mapping, expect_str
from resumable_data.checkpoint.codec import decode, encode
from resumable_data.checkpoint.compat import CompatibilityReport
from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.checkpoint.meta import CheckpointMeta, new_id
from resumable_data.errors import ConfigError, describe
from resumable_data.labels import RecoveryLabel

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_SCHEMA_VERSION",
    "LoadedCheckpoint",
    "cleanup_incomplete",
    "list_checkpoints",
    "load_checkpoint",
    "read_checkpoint",
    "resolve_checkpoint",
    "save_checkpoint",
]

CHECKPOINT_FORMAT = "resumable_data.checkpoint"
CHECKPOINT_SCHEMA_VERSION = 1
TENSORS = "tensors.safetensors"
STATE_JSON = "state.json"
META_JSON = "meta.json"
INVENTORY_JSON = "inventory.json"
MARKER = "COMMITTED"
LATEST = "latest"
STEP_PREFIX = "step-"
TMP_PREFIX = ".tmp-"
TRASH_PREFIX = ".trash-"
STEP_RE = re.compile(r"^step-(\d{12})$")
K_FILES = "files"
K_STEP = "step"
K_CHECKPOINT_ID = "checkpoint_id"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _hash_file(path: Path) -> str:
    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, sort_keys=True, indent=1) + "\n").encode()


def step_dir_name(step: int) -> str:
    return f"{STEP_PREFIX}{step:012d}"


def cleanup_incomplete(directory: str | os.PathLike) -> list[Path]:
    """Remove leftovers of interrupted saves (``.tmp-*``, ``.trash-*``, stray ``latest`` temp
    files and step directories without a valid marker); returns what was removed. Call it only
    where no other process is saving into ``directory``."""
    root = Path(directory)
    removed = []
    if not root.is_dir():
        return removed
    for p in root.iterdir():
        if p.name.startswith((TMP_PREFIX, TRASH_PREFIX, f".{LATEST}.tmp")) or (STEP_RE.match(p.name) and not _complete(p)):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            removed.append(p)
    if removed:
        _fsync_dir(root)
    return removed


def _read_marker(path: Path) -> dict[str, Any]:
    try:
        d = json.loads((path / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise CheckpointError(describe("checkpoint", str(path), f"a readable {MARKER} marker ({e})",
                                       "the save was interrupted: load another checkpoint")) from None
    expect_mapping(d, f"{path.name}/{MARKER}", {"format", "schema_version", K_STEP, K_CHECKPOINT_ID, K_FILES},
                   error=CheckpointError)
    expect_header(d, CHECKPOINT_FORMAT, CHECKPOINT_SCHEMA_VERSION, f"{path.name}/{MARKER}", error=CheckpointError)
    expect_int(d[K_STEP], f"{MARKER}.step", error=CheckpointError)
    if not isinstance(d[K_FILES], dict) or set(d[K_FILES]) != {TENSORS, STATE_JSON, META_JSON, INVENTORY_JSON}:
        raise CheckpointError(describe(f"{MARKER}.files", d[K_FILES], f"entries for {[TENSORS, STATE_JSON, META_JSON, INVENTORY_JSON]}",
                                       "load another checkpoint"))
    return d


def _complete(path: Path) -> bool:
    try:
        d = _read_marker(path)
        return all((path / n).is_file() and (path / n).stat().st_size == f["size"] for n, f in d[K_FILES].items())
    except (CheckpointError, OSError, TypeError, KeyError):
        return False


def list_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """Complete step directories, oldest first."""
    root = Path(directory)
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if STEP_RE.match(p.name) and p.is_dir() and _complete(p)),
                  key=lambda p: p.name)


def resolve_checkpoint(path: str | os.PathLike, step: int | None = None) -> Path:
    """The step directory to load: ``path`` itself if it is one, else ``step``, else ``latest``
    (falling back to the newest complete one if ``latest`` is missing or incomplete)."""
    p = Path(path)
    if (p / MARKER).exists() or STEP_RE.match(p.name):
        if not _complete(p):
            raise CheckpointError(describe("checkpoint", str(p), "a complete checkpoint (valid COMMITTED marker)",
                                           "load the parent directory to get the newest complete one"))
        return p
    if not p.is_dir():
        raise CheckpointError(describe("directory", str(p), "an existing checkpoint directory", "check the path"))
    if step is not None:
        q = p / step_dir_name(check_int(step, "step"))
        if not _complete(q):
            raise CheckpointError(describe("step", step, f"a complete checkpoint in {p}",
                                           f"pick one of {[c.name for c in list_checkpoints(p)]}"))
        return q
    latest = p / LATEST
    name = None
    if latest.is_file():
        name = latest.read_text(encoding="utf-8").strip()
        if STEP_RE.match(name) and _complete(p / name):
            return p / name
    done = list_checkpoints(p)
    if not done:
        raise CheckpointError(describe("directory", str(p), "at least one complete checkpoint",
                                       "save one with rd.save_checkpoint first"))
    warnings.warn(f"{latest}: {'names ' + repr(name) if name else 'missing'}, which is not a complete checkpoint; "
                  f"loading the newest complete one, {done[-1].name}", RuntimeWarning, stacklevel=3)
    return done[-1]


def save_checkpoint(directory: str | os.PathLike, state: Any, *, step: int | None = None, keep_last: int | None = 3) -> Path:
    """Write ``state`` (a :class:`TrainingState` or any object whose ``state_dict()`` holds tensors
    and JSON values) as ``directory/step-N`` atomically; returns that path.

    ``step`` defaults to the loader's delivered-step cursor; ``keep_last=None`` keeps every checkpoint.

    Single process only: with torch.distributed initialized and more than one rank this raises
    :class:`ConfigError` before writing anything. Several ranks writing one directory would race on
    ``latest`` and the retention, and one rank's file cannot hold the other ranks' generators and
    cursors; save through ``torch.distributed.checkpoint`` with :class:`TrainingState` instead
    (``dcp.save({"train": state}, checkpoint_id=path)`` on every rank), which keeps each rank's state."""
    from resumable_data.checkpoint.census import build_inventory
    from resumable_data.checkpoint.state import TrainingState

    dist = __import__("torch").distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        raise ConfigError(describe(
            "torch.distributed world_size", dist.get_world_size(),
            "a single process (rd.save_checkpoint writes one process's state into a directory with one writer)",
            "on every rank call torch.distributed.checkpoint.save({'train': rd.TrainingState(...)}, checkpoint_id=path) "
            "and dcp.load(...) to resume: it keeps every rank's RNG and data cursor"))
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    if step is None:
        loader = getattr(state, "loader", None)
        if loader is None:
            raise ConfigError(describe("step", None, "an integer step", "pass step= (e.g. the applied-update count)"))
        step = int(loader.cursor.delivered)
    step = check_int(step, "step")
    if keep_last is not None:
        keep_last = check_int(keep_last, "keep_last", 1)
    cleanup_incomplete(root)
    checkpoint_id = new_id()
    if isinstance(state, TrainingState):
        tree = state.file_state_dict(checkpoint_id=checkpoint_id)
        inventory = build_inventory(state, tree).to_dict()
    else:
        if not callable(getattr(state, "state_dict", None)):
            raise ConfigError(describe("state", type(state).__name__, "an rd.TrainingState or an object with state_dict()",
                                       "wrap the training objects in rd.TrainingState"))
        tree = state.state_dict()
        inventory = {"format": "resumable_data.inventory", "schema_version": 1, "entries": []}
    meta = tree.get("meta") if isinstance(tree, dict) else None
    json_tree, tensors = encode(tree)

    tmp = root / f"{TMP_PREFIX}{step_dir_name(step)}-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    from safetensors.torch import save_file

    save_file(tensors, str(tmp / TENSORS), metadata={"format": CHECKPOINT_FORMAT})
    with open(tmp / TENSORS, "rb") as f:
        os.fsync(f.fileno())
    _write(tmp / STATE_JSON, _json_bytes(json_tree))
    _write(tmp / META_JSON, _json_bytes(meta))
    _write(tmp / INVENTORY_JSON, _json_bytes(inventory))
    files = {n: {"size": (tmp / n).stat().st_size, "xxh3_128": _hash_file(tmp / n)}
             for n in (TENSORS, STATE_JSON, META_JSON, INVENTORY_JSON)}
    _write(tmp / MARKER, _json_bytes({"format": CHECKPOINT_FORMAT, "schema_version": CHECKPOINT_SCHEMA_VERSION,
                                      K_STEP: step, K_CHECKPOINT_ID: checkpoint_id, K_FILES: files}))
    _fsync_dir(tmp)
    final = root / step_dir_name(step)
    trash = None
    if final.exists():
        trash = root / f"{TRASH_PREFIX}{final.name}-{secrets.token_hex(4)}"
        os.rename(final, trash)
    os.rename(tmp, final)
    _fsync_dir(root)
    latest_tmp = root / f".{LATEST}.tmp-{os.getpid()}"
    _write(latest_tmp, (final.name + "\n").encode())
    os.replace(latest_tmp, root / LATEST)
    _fsync_dir(root)
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)
    if keep_last is not None:
        done = list_checkpoints(root)
        for old in done[:-keep_last]:
            if old.name != final.name:
                shutil.rmtree(old, ignore_errors=True)
    return final


@dataclass(frozen=True)
class RawCheckpoint:
    path: Path
    step: int
    checkpoint_id: str
    tree: Any                  # decoded state (tensors included)
    meta: CheckpointMeta | None
    inventory: dict


def read_checkpoint(path: str | os.PathLike, step: int | None = None) -> RawCheckpoint:
    """Read and verify one checkpoint (sizes, hashes, schema) without restoring anything."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    p = resolve_checkpoint(path, step)
    marker = _read_marker(p)
    problems = []
    for n, f in marker[K_FILES].items():
        q = p / n
        if not q.is_file() or q.stat().st_size != f.get("size"):
            problems.append(f"{n}: missing or wrong size")
        elif _hash_file(q) != f.get("xxh3_128"):
            problems.append(f"{n}: content hash differs from the marker's")
    if problems:
        raise CheckpointError(describe("checkpoint", str(p), "files matching their COMMITTED marker",
                                       "the checkpoint is damaged: load another one (" + "; ".join(problems) + ")"))
    try:
        json_tree = json.loads((p / STATE_JSON).read_text(encoding="utf-8"))
        meta_d = json.loads((p / META_JSON).read_text(encoding="utf-8"))
        inventory = json.loads((p / INVENTORY_JSON).read_text(encoding="utf-8"))
        tensors = load_file(str(p / TENSORS))
    except (ValueError, OSError, RecursionError, SafetensorError) as e:
        raise CheckpointError(describe("checkpoint", str(p), f"readable JSON and safetensors ({e})",
                                       "load another checkpoint")) from None
    tree = decode(json_tree, tensors)
    meta = CheckpointMeta.from_dict(meta_d) if meta_d is not None else None
    return RawCheckpoint(p, marker[K_STEP], expect_str(marker[K_CHECKPOINT_ID], "checkpoint_id", error=CheckpointError),
                         tree, meta, inventory)


@dataclass(frozen=True)
class LoadedCheckpoint:
    """What :func:`load_checkpoint` restored."""

    path: Path
    step: int
    checkpoint_id: str
    label: RecoveryLabel
    meta: CheckpointMeta | None
    report: CompatibilityReport | None


def load_checkpoint(directory: str | os.PathLike, state: Any, *,
                    label: RecoveryLabel | str = RecoveryLabel.FAITHFUL_CONTINUATION,
                    step: int | None = None) -> LoadedCheckpoint:
    """Restore ``state`` from ``directory`` (its ``latest``, or ``step``, or a step directory).

    The compatibility contract is checked before anything changes; a refused difference raises
    :class:`CompatibilityError`, a damaged checkpoint :class:`CheckpointError`."""
    from resumable_data._schema import coerce_enum
    from resumable_data.checkpoint.state import TrainingState

    label = coerce_enum(label, RecoveryLabel, "label")
    raw = read_checkpoint(directory, step)
    report = None
    if isinstance(state, TrainingState):
        report = state.load_state_dict(raw.tree, label=label)
    else:
        try:
            result = state.load_state_dict(raw.tree, label=label)
        except TypeError:
            result = state.load_state_dict(raw.tree)
        report = result if isinstance(result, CompatibilityReport) else None
    return LoadedCheckpoint(raw.path, raw.step, raw.checkpoint_id, label, raw.meta, report)
