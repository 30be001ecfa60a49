"""Atomic, never-unpickling checkpoints on a local file system.

Layout of ``directory``::

    latest                      # text: the name of the newest complete step directory
    step-000000000012/
        tensors.safetensors     # every tensor of the state (safetensors: no code, no pickle)
        state.json              # the rest of the state; tensors appear as {"__tensor__": name}
        meta.json               # CheckpointMeta (what check_compatible compares)
        inventory.json          # the inventory table with its oracle values
        COMMITTED               # written last: format, step, checkpoint id, size + xxh3-128 of each file

Saving (:mod:`.save`) writes a step into a private temporary directory and renames it into place,
then replaces ``latest``; this module holds the layout, the recovery both sides run, listing and reading.

Recovery (at the start of every save, and :func:`cleanup_incomplete`): for a step without a
complete ``step-N``, a complete ``.tmp-step-N-*`` (the newer save) or else a complete
``.aside-step-N-*`` (the older) is renamed back to ``step-N``; then ``.tmp-*``, ``.aside-*``,
``.trash-*``, ``latest`` temp files and step directories without a valid marker are removed. So a
re-save killed between its two renames loses neither copy, and the next save keeps one.

Steps: ``0 <= step < 10**12`` (the directory names have 12 digits); a larger step is a
:class:`ConfigError` before anything is written.

Guarantee: a process killed at any instant leaves ``latest`` naming a complete checkpoint (or no
``latest`` before the first save completes), or, in the window of a re-save between its two
renames, a complete copy of that step beside it that the loader falls back to; a directory
without a valid ``COMMITTED`` marker is never loaded; if ``latest`` is missing, unreadable (not a
regular file, over 256 bytes, not UTF-8, garbage) or names an incomplete directory, the newest
complete checkpoint (step directories, then the complete leftovers above) is loaded instead (with
a warning). Loading refuses checkpoint files that are not regular files (FIFOs, devices, sockets,
symlinks, directories) without opening them, refuses files larger than their format allows
(``files.LIMITS``), checks every file's size and xxh3-128 and never unpickles: tensors come from
safetensors, everything else from JSON. Each file is opened once; the bytes that were hashed are
the bytes that are parsed (a file swapped between a hash and a second open was parsed unchecked):
the JSON files are read into memory, the tensor file is hashed while each tensor is read into its
own storage, its header validated by rd first (:mod:`.tensor_file`). The safetensors file's ``__metadata__`` must be the format tag the save
writes (:data:`TENSORS_METADATA`: format name and schema version; the format name alone, as
earlier saves wrote it, reads as version 1). ``meta.json`` must equal the metadata inside
``state.json`` and carry the marker's ``checkpoint_id`` (files of two saves put together, each
re-hashed into the marker, are refused); ``inventory.json``'s header is enforced. Only a
:class:`CheckpointMeta`'s JSON (its ``format``) is written to ``meta.json``: another object's
state may have a ``meta`` key of its own. One writer per directory (ranks of a distributed job use
``torch.distributed.checkpoint`` with :class:`TrainingState` instead).

Cost: save writes the state once plus fsyncs; load reads and hashes it once, holding the JSON
files and the tensors (peak: about the tensor file's size, plus the JSON files).
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
from stat import S_ISBLK, S_ISCHR, S_ISFIFO, S_ISREG
from typing import Any

import xxhash

from resumable_data._io import fsync_dir
from resumable_data._schema import expect_header, expect_int, expect_mapping, expect_str
from resumable_data.checkpoint.codec import decode
from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.checkpoint.files import LIMITS, is_regular, read_exact, read_regular, writer_lock
from resumable_data.checkpoint.inventory import Inventory
from resumable_data.checkpoint.meta import META_FORMAT, CheckpointMeta
from resumable_data.checkpoint.tensor_file import read_tensor_file
from resumable_data.errors import ConfigError, ConfigTypeError, ResumableDataError, describe

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_SCHEMA_VERSION",
    "MAX_STEP",
    "cleanup_incomplete",
    "list_checkpoints",
    "read_checkpoint",
    "resolve_checkpoint",
    "survey_checkpoints",
]

CHECKPOINT_FORMAT = "resumable_data.checkpoint"
#: 2: the state codec's NumPy values, memory-ordered tensors, unsorted dict keys and the Python types
#: it keeps (torch.Size, OrderedDict, Counter, Parameter, requires_grad, bytes, complex: :mod:`.codec`);
#: a checkpoint of version 1 (none of those: a tag of them is refused) loads as before, an older rd
#: refuses a version 2 one.
CHECKPOINT_SCHEMA_VERSION = 2
_OLDER_VERSIONS = (1,)  # read as before
TENSORS = "tensors.safetensors"
STATE_JSON = "state.json"
META_JSON = "meta.json"
INVENTORY_JSON = "inventory.json"
MARKER = "COMMITTED"
LATEST = "latest"
STEP_PREFIX = "step-"
TMP_PREFIX = ".tmp-"
TRASH_PREFIX = ".trash-"
ASIDE_PREFIX = ".aside-"
STEP_RE = re.compile(r"^step-(\d{12})$")
#: Leftovers that may hold a complete copy of step N (a save killed after its marker, a re-save
#: killed between its renames).
ORPHAN_RE = re.compile(r"^\.(tmp|aside)-step-(\d{12})-")
#: The largest step: directory names have 12 digits.
MAX_STEP = 10**12 - 1
FILES = (TENSORS, STATE_JSON, META_JSON, INVENTORY_JSON)
K_FILES = "files"
K_STEP = "step"
K_CHECKPOINT_ID = "checkpoint_id"
K_META = "meta"


def _json_bytes(obj: Any, *, sort_keys: bool = True) -> bytes:
    return (json.dumps(obj, sort_keys=sort_keys, indent=1) + "\n").encode()


def step_dir_name(step: int) -> str:
    return f"{STEP_PREFIX}{step:012d}"


def check_step(step: Any, param: str = "step") -> int:
    """``step`` as an int in ``[0, MAX_STEP]``; :class:`ConfigError` naming the limit otherwise."""
    import numpy as np

    if isinstance(step, np.integer):
        step = int(step)
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise ConfigError(
            describe(
                param,
                step,
                f"an integer in [0, {MAX_STEP}] (checkpoint directories are named step-<12 digits>)",
                "pass a step below 10**12 (e.g. the applied-update count)",
            )
        )
    return step


def _rmtree(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _orphans(root: Path, names: list[str]) -> dict[int, Path]:
    """step -> the complete leftover to recover for steps without a complete ``step-N`` (module docs)."""
    best: dict[int, tuple[int, str]] = {}
    for name in names:
        m = ORPHAN_RE.match(name)
        if m and _complete(root / name):
            rank = 0 if m.group(1) == "tmp" else 1  # the newer save first
            step = int(m.group(2))
            if step not in best or (rank, name) < best[step]:
                best[step] = (rank, name)
    return {step: root / name for step, (_, name) in best.items() if not _complete(root / step_dir_name(step))}


def cleanup_incomplete(directory: str | os.PathLike) -> list[Path]:
    """Recover complete leftovers of interrupted saves, then remove the rest (``.tmp-*``,
    ``.aside-*``, ``.trash-*``, stray ``latest`` temp files and step directories without a valid
    marker); returns what was removed. Takes the folder's writer lock (a :class:`CheckpointError`
    while another process saves into ``directory``)."""
    root = Path(directory)
    if not root.is_dir():
        return []
    with writer_lock(root):
        return _cleanup(root)


def _cleanup(root: Path) -> list[Path]:
    names = sorted(os.listdir(root))
    recovered = False
    for step, src in sorted(_orphans(root, names).items()):
        final = root / step_dir_name(step)
        if os.path.lexists(final):  # an incomplete step-N: make room for the complete copy
            trash = root / f"{TRASH_PREFIX}{final.name}-{secrets.token_hex(4)}"
            os.rename(final, trash)
        os.rename(src, final)
        recovered = True
    if recovered:
        fsync_dir(root)
        names = sorted(os.listdir(root))
    removed = []
    for name in names:
        p = root / name
        if name.startswith((TMP_PREFIX, TRASH_PREFIX, ASIDE_PREFIX, f".{LATEST}.")) or (
            STEP_RE.match(name) and not _complete(p)
        ):
            _rmtree(p)
            removed.append(p)
    if removed:
        fsync_dir(root)
    return removed


def _read_marker(path: Path) -> dict[str, Any]:
    where = f"{path.name}/{MARKER}"
    raw = read_regular(path / MARKER)  # CheckpointError for a FIFO, device, link or oversized file
    try:
        d = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise CheckpointError(
            describe(
                "checkpoint",
                str(path),
                f"a readable {MARKER} marker ({e})",
                "the save was interrupted: load another checkpoint",
            )
        ) from None
    expect_mapping(d, where, {"format", "schema_version", K_STEP, K_CHECKPOINT_ID, K_FILES}, error=CheckpointError)
    expect_header(d, CHECKPOINT_FORMAT, CHECKPOINT_SCHEMA_VERSION, where, error=CheckpointError, also=_OLDER_VERSIONS)
    expect_int(d[K_STEP], f"{where}.step", 0, MAX_STEP, error=CheckpointError)
    expect_str(d[K_CHECKPOINT_ID], f"{where}.checkpoint_id", max_len=256, error=CheckpointError)
    m = STEP_RE.match(path.name) or ORPHAN_RE.match(path.name)
    if m and int(m.groups()[-1]) != d[K_STEP]:
        raise CheckpointError(
            describe(
                f"{where}.step",
                d[K_STEP],
                f"the step its directory names ({path.name})",
                "load another checkpoint (this one was renamed or edited)",
            )
        )
    files = d[K_FILES]
    if not isinstance(files, dict) or set(files) != set(FILES):
        raise CheckpointError(
            describe(f"{where}.files", files, f"entries for {list(FILES)}", "load another checkpoint")
        )
    for n, f in files.items():
        expect_mapping(f, f"{where}.files.{n}", {"size", "xxh3_128"}, error=CheckpointError)
        expect_int(f["size"], f"{where}.files.{n}.size", 0, LIMITS[n], error=CheckpointError)
        expect_str(f["xxh3_128"], f"{where}.files.{n}.xxh3_128", max_len=32, error=CheckpointError)
    return d


def _why_incomplete(path: Path) -> str | None:
    """None for a complete checkpoint directory, else why it is not one."""
    try:
        d = _read_marker(path)
        for n, f in d[K_FILES].items():
            st = os.lstat(path / n)
            if not is_regular(path / n) or st.st_size != f["size"]:
                return f"{n}: not a regular file of the {f['size']} bytes its marker records"
        return None
    except (ResumableDataError, OSError) as e:
        return str(e)


def _complete(path: Path) -> bool:
    return _why_incomplete(path) is None


def list_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """Complete step directories, oldest first."""
    root = Path(directory)
    if not root.is_dir():
        return []
    return sorted(
        (p for p in root.iterdir() if STEP_RE.match(p.name) and p.is_dir() and _complete(p)), key=lambda p: p.name
    )


def _loadable(root: Path) -> dict[int, Path]:
    """step -> complete checkpoint: step directories, plus complete leftovers of steps without one."""
    out = {int(m.group(1)): p for p in list_checkpoints(root) if (m := STEP_RE.match(p.name))}  # all match
    for step, p in _orphans(root, sorted(os.listdir(root))).items():
        out.setdefault(step, p)
    return out


def survey_checkpoints(directory: str | os.PathLike) -> tuple[Path | None, dict[str, str]]:
    """(the newest loadable checkpoint: a complete step directory or the complete leftover of an
    interrupted re-save of a step that has none, as saving recovers it; None if there is none),
    and ``{name: why}`` for each step directory newer than it that has a ``COMMITTED`` marker but is
    not complete: a checkpoint that was complete once (rd's atomic save never publishes an
    incomplete one) and is now damaged, truncated or missing a file. A step directory without a
    marker is a write that never finished (or a copy still under way) and is not listed."""
    root = Path(directory)
    if not root.is_dir():
        return None, {}
    done = _loadable(root)
    floor = max(done) if done else -1
    bad = {}
    for name in sorted(os.listdir(root)):
        m = STEP_RE.match(name)
        if m and int(m.group(1)) > floor and os.path.lexists(root / name / MARKER):
            why = _why_incomplete(root / name)
            if why is not None:
                bad[name] = why
    return (done[floor] if done else None), bad


def _read_latest(root: Path) -> tuple[str | None, str]:
    """(the step directory ``latest`` names, or None; why not)."""
    latest = root / LATEST
    if not os.path.lexists(latest):
        return None, "missing"
    try:
        name = read_regular(latest).decode("utf-8").strip()
    except (CheckpointError, UnicodeDecodeError) as e:
        return None, f"unreadable ({e})"
    if not STEP_RE.match(name):
        return None, f"names {name[:40]!r}"
    return name, f"names {name!r}"


def _path(value: Any, param: str) -> Path:
    if not isinstance(value, (str, os.PathLike)):  # Path(None) raised a bare TypeError
        raise ConfigTypeError(
            describe(param, value, "a path (str or os.PathLike) to a checkpoint directory", f"pass {param}='ckpt'")
        )
    if os.fspath(value) == "":  # Path("") is the working directory: checkpoints written among the user's files
        raise ConfigError(describe(param, value, "a non-empty path to a checkpoint directory", f"pass {param}='ckpt'"))
    return Path(value)


def _kind_at(p: Path) -> str:
    """What is at ``p`` (which exists and is not a directory), in words."""
    try:
        mode = os.stat(p).st_mode
    except OSError:  # a dangling link, a link loop
        return "a link to nothing loadable"
    for test, words in ((S_ISREG, "a file"), (S_ISFIFO, "a FIFO"), (S_ISCHR, "a device"), (S_ISBLK, "a device")):
        if test(mode):
            return words
    return "something other than a directory"


def resolve_checkpoint(path: str | os.PathLike, step: int | None = None) -> Path:
    """The step directory to load: ``path`` itself if it is one, else ``step``, else ``latest``
    (falling back to the newest complete one if ``latest`` is missing, unreadable or incomplete, or
    names an older step than a complete one: what ``rd.resume_or_start`` loads, and saves keep)."""
    p = _path(path, "directory")
    if os.path.lexists(p / MARKER) or STEP_RE.match(p.name):
        why = _why_incomplete(p)
        if why is not None:
            raise CheckpointError(
                describe(
                    "checkpoint",
                    str(p),
                    f"a complete checkpoint (valid COMMITTED marker; {why})",
                    "load the parent directory to get the newest complete one",
                )
            )
        m = STEP_RE.match(p.name)
        own = None if step is None else int(m.group(1)) if m else _read_marker(p)[K_STEP]
        if step is not None and check_step(step) != own:
            raise CheckpointError(  # the directory's own step was loaded, the step asked for ignored
                describe(
                    "step",
                    step,
                    f"None or the step of the checkpoint directory passed ({str(p)!r} is step {own})",
                    f"pass the parent directory with step={step} ({str(p.parent)!r}), or drop step=",
                )
            )
        return p
    if not p.is_dir():
        there = "nothing is at" if not os.path.lexists(p) else _kind_at(p) + " is at"
        raise CheckpointError(
            describe(
                "directory",
                str(p),
                f"an existing checkpoint directory ({there} {str(p.absolute())!r})",
                "pass the directory rd.save_checkpoint wrote into, or call rd.resume_or_start(directory, state), "
                "which starts from step 0 when there is no checkpoint yet",
            )
        )
    if step is not None:
        q = _loadable(p).get(check_step(step))
        if q is None:
            raise CheckpointError(
                describe(
                    "step",
                    step,
                    f"a complete checkpoint in {p}",
                    f"pick one of {[c.name for c in list_checkpoints(p)]}",
                )
            )
        return q
    name, why = _read_latest(p)
    done = _loadable(p)
    if name is not None and _complete(p / name):
        m = STEP_RE.match(name)
        if m is None or int(m.group(1)) >= max(done, default=-1):
            return p / name
        # a newer complete step (a save killed after its files were complete, before its rename or
        # `latest`): what rd.resume_or_start resumes and the next save keeps (saves never go below the
        # newest step); no warning, as resume_or_start gives none (a kill there is an ordinary crash)
        return done[max(done)]
    if not done:
        raise CheckpointError(
            describe("directory", str(p), "at least one complete checkpoint", "save one with rd.save_checkpoint first")
        )
    newest = done[max(done)]
    warnings.warn(
        f"{p / LATEST}: {why}, which is not a complete checkpoint; loading the newest complete one, {newest.name}",
        RuntimeWarning,
        stacklevel=3,
    )
    return newest


def _tree_meta(tree: Any) -> Any:
    """The checkpoint metadata a state tree holds (``meta.json``): its ``meta`` entry when that is a
    :class:`CheckpointMeta`'s JSON (``format`` names it), else None. Another object's state may hold
    a ``meta`` key of its own: that is state, not checkpoint metadata (writing it to ``meta.json``
    made the checkpoint unloadable)."""
    meta = tree.get(K_META) if isinstance(tree, dict) else None
    return meta if isinstance(meta, dict) and meta.get("format") == META_FORMAT else None


@dataclass(frozen=True)
class RawCheckpoint:
    path: Path
    step: int
    checkpoint_id: str
    tree: Any  # decoded state (tensors included)
    meta: CheckpointMeta | None
    inventory: dict


def _json_bytes_of(p: Path, raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise CheckpointError(
            describe("checkpoint file", str(p), f"readable JSON ({e})", "load another checkpoint")
        ) from None


#: The ``__metadata__`` of a checkpoint's safetensors file: its format name and schema version
#: (safetensors metadata values are strings). Files saved before the version was written carry the
#: format name alone, which reads as version 1.
TENSORS_METADATA = {"format": CHECKPOINT_FORMAT, "schema_version": str(CHECKPOINT_SCHEMA_VERSION)}


def _check_tensors_tag(metadata: Any, version: int) -> None:
    """The safetensors file's ``__metadata__`` is the format tag a save of the marker's schema
    ``version`` writes (for version 1 also the format name alone, as the first saves wrote it)."""
    tags = [{"format": CHECKPOINT_FORMAT, "schema_version": str(version)}]
    if version == 1:
        tags.append({"format": CHECKPOINT_FORMAT})
    if metadata not in tags:
        raise CheckpointError(
            describe(
                f"{TENSORS} __metadata__",
                metadata,
                f"{tags[0]} (the format tag rd.save_checkpoint writes)",
                "the file is not one this package wrote for this checkpoint: load another checkpoint",
            )
        )


def read_checkpoint(path: str | os.PathLike, step: int | None = None) -> RawCheckpoint:
    """Read and verify one checkpoint (sizes, hashes, schema) without restoring anything.

    Each JSON file is read once into memory (``files.read_exact``), hashed, and parsed from those
    same bytes; the tensor file is hashed while each tensor is read into its own storage
    (:mod:`.tensor_file`): a file swapped after it was hashed is never parsed. Cost: one read and
    hash of every file; memory: the JSON files and the tensors (about 1x the tensor file)."""
    p = resolve_checkpoint(path, step)
    marker = _read_marker(p)
    problems = []
    raw: dict[str, bytes] = {}
    tensor_file = None
    for n, f in marker[K_FILES].items():
        try:
            if n == TENSORS:  # hashed while each tensor is read into its own storage
                tensor_file = read_tensor_file(p / n, f["size"], f["xxh3_128"])
                if tensor_file.problem is not None:
                    problems.append(f"{n}: {tensor_file.problem}")
                continue
            data = read_exact(p / n, f["size"])
        except CheckpointError as e:
            problems.append(f"{n}: {e}")
            continue
        if data is None:
            problems.append(f"{n}: missing or wrong size")
        elif xxhash.xxh3_128_hexdigest(data) != f["xxh3_128"]:
            problems.append(f"{n}: content hash differs from the marker's")
        else:
            raw[n] = data
    if problems:
        raise CheckpointError(
            describe(
                "checkpoint",
                str(p),
                "files matching their COMMITTED marker",
                "the checkpoint is damaged: load another one (" + "; ".join(problems) + ")",
            )
        )
    json_tree, meta_d, inventory = (_json_bytes_of(p / n, raw.pop(n)) for n in (STATE_JSON, META_JSON, INVENTORY_JSON))
    if tensor_file is not None and tensor_file.error is not None:
        raise tensor_file.error  # a header refused, the bytes being the marker's
    if tensor_file is None or tensor_file.tensors is None:  # pragma: no cover - _read_marker requires every file
        raise CheckpointError(
            describe("checkpoint", str(p), f"a {TENSORS} in its COMMITTED marker", "load another checkpoint")
        )
    _check_tensors_tag(tensor_file.metadata, marker["schema_version"])
    tensors = tensor_file.tensors
    tree = decode(json_tree, tensors, version=marker["schema_version"])
    meta = CheckpointMeta.from_dict(meta_d) if meta_d is not None else None
    _check_same_checkpoint(p, marker, json_tree, meta_d, meta)
    Inventory.from_dict(inventory)  # format, schema_version and entries (CheckpointError, naming the field)
    return RawCheckpoint(p, marker[K_STEP], marker[K_CHECKPOINT_ID], tree, meta, inventory)


def _canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)  # NaN and the infinities render equal on both sides


def _check_same_checkpoint(p: Path, marker: dict, json_tree: Any, meta_d: Any, meta: CheckpointMeta | None) -> None:
    """``meta.json`` is the metadata the state was saved with, and both belong to the marker's save.

    ``meta.json`` is a copy of ``state.json``'s ``meta`` (what a restore compares): ``inspect``,
    ``--against`` and ``LoadedCheckpoint.meta`` read the copy. Files of two saves put together
    (each re-hashed into the marker) would show one checkpoint's metadata and restore the other's
    state, so they must agree, and their ``checkpoint_id`` must be the marker's."""
    in_state = _tree_meta({K_META: decode(json_tree.get(K_META), {})} if isinstance(json_tree, dict) else None)
    if _canonical_json(meta_d) != _canonical_json(in_state):
        raise CheckpointError(
            describe(
                "checkpoint",
                str(p),
                f"{META_JSON} equal to the metadata saved in {STATE_JSON} (its 'meta' entry)",
                "the checkpoint was edited or put together from two saves: load another one",
            )
        )
    if meta is not None and meta.checkpoint_id is not None and meta.checkpoint_id != marker[K_CHECKPOINT_ID]:
        raise CheckpointError(
            describe(
                f"{META_JSON}.checkpoint_id",
                meta.checkpoint_id,
                f"the id in its {MARKER} marker ({marker[K_CHECKPOINT_ID]})",
                "the checkpoint was put together from two saves: load another one",
            )
        )
