"""Worker of ``test_compressed_flips.py`` (run as a script, never imported by pytest).

Reads one JSON job on stdin: ``{"clean": path, "name": shard file name, "work": dir, "cases":
[[offset, value], ...]}``. ``value`` replaces the byte at ``offset`` (the parent draws XOR 0xFF and
random values). Per case it prints one JSON line (flushed) ``[offset, value, {reader: outcome}]``,
so that the parent knows which case a crash or hang belongs to. Readers:

* ``pinned``: the folder pinned on the clean bytes, the damaged file (a fresh inode) read whole by
  ``take`` at the default settings (``verify="cached"``: the content hash refuses it);
* ``size``: the same, at ``verify="size"`` (structural validation and decoding alone);
* ``size_seq`` / ``size_global`` / ``size_window``: an ``rd.DataLoader`` (no workers) over the
  ``verify="size"`` source, sequential, global shuffle, window shuffle, every batch compared in
  order with the clean file's batches (the version is the clean pin's, so is the order);
* ``allow``: never pinned, ``unpinned="allow"``, read whole by ``take``;
* ``autopin``: never pinned, auto-pinned (``unpinned="pin"``, the default) into the cache, then
  read whole and through a sequential loader.

Outcomes: ``refused`` (an rd error), ``identical``, ``wrong`` (other records: a failure where the
clean pin exists and the default settings read), ``changed`` (other records where no clean
reference exists or ``verify="size"`` was asked for: a well-formed change nothing can tell from the
truth), ``non-rd:...``; the parent adds ``crash`` and ``hang``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
from pathlib import Path


import numpy as np

import resumable_data as rd

LOADERS = {"seq": {"shuffle": False}, "global": {"shuffle": True}, "window": {"shuffle": True, "shuffle_window": 5}}


def rows_collate(rows):
    return rows


def loader_rows(src, how: str) -> list:
    loader = rd.DataLoader(src, batch_size=4, seed=3, collate_fn=rows_collate, **LOADERS[how])
    return [list(b) for b in loader]


def outcome(fn, clean, strict: bool) -> str:
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # auto-pin says so on stderr
            got = fn()
    except rd.ResumableDataError:
        return "refused"
    except BaseException as exc:  # noqa: BLE001 - every non-rd exception is a failure
        return f"non-rd:{type(exc).__name__}:{str(exc)[:120]}"
    if got == clean:
        return "identical"
    return "wrong" if strict else "changed"


def take_all(src) -> list:
    """Every record, or (a damaged header that claims more rows than the clean file's few dozen)
    the first 1,000 and the last: what a loader would read first, never a list of 10**14 ids."""
    n = len(src)
    ids = np.arange(n) if n <= 1000 else np.append(np.arange(1000), n - 1)
    return src.take(ids).to_pylist()


def main() -> None:
    job = json.load(sys.stdin)
    work, name = Path(job["work"]), job["name"]
    clean = Path(job["clean"]).read_bytes()
    pinned = work / "pinned"
    pinned.mkdir(parents=True, exist_ok=True)
    target = pinned / name
    target.write_bytes(clean)
    rd.pin(pinned)
    ref = rd.ArrowShards(pinned)
    clean_rows = take_all(ref)
    clean_loaders = {how: loader_rows(ref, how) for how in LOADERS}
    ref.close()
    for i, (offset, value) in enumerate(job["cases"]):
        data = bytearray(clean)
        data[offset] = value
        tmp = pinned / ".flip.tmp"
        tmp.write_bytes(bytes(data))
        os.replace(tmp, target)
        out = {
            "pinned": outcome(lambda: take_all(rd.ArrowShards(pinned)), clean_rows, True),
            "size": outcome(lambda: take_all(rd.ArrowShards(pinned, verify="size")), clean_rows, False),
        }
        for how in LOADERS:
            out[f"size_{how}"] = outcome(
                lambda how=how: loader_rows(rd.ArrowShards(pinned, verify="size"), how), clean_loaders[how], False
            )
        fresh = work / f"fresh{i}"
        fresh.mkdir()
        (fresh / name).write_bytes(bytes(data))
        out["allow"] = outcome(lambda f=fresh: take_all(rd.ArrowShards(f, unpinned="allow")), clean_rows, False)

        def autopin(f=fresh):
            src = rd.ArrowShards(f)
            return [take_all(src), [r for b in loader_rows(src, "seq") for r in b]]

        out["autopin"] = outcome(autopin, [clean_rows, clean_rows], False)
        shutil.rmtree(fresh, ignore_errors=True)
        print(json.dumps([offset, value, out]), flush=True)


if __name__ == "__main__":
    main()
