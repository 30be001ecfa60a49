"""Worker of ``test_attack_sweeps.py`` (run as a script, never imported by pytest).

Reads one JSON job on stdin: ``{"clean": path, "name": shard file name, "work": dir, "cases":
[[attack, mode, reader, arg], ...]}`` and prints one JSON line per case (flushed), so that the
parent knows which case a crash or hang belongs to: ``[attack, mode, reader, arg, outcome]``.

Attacks (``arg`` is a byte offset or a length):

* ``flip``: the shard replaced (new inode) by a copy with byte ``arg`` XOR 0xFF, then opened.
* ``truncate``: the shard replaced by its first ``arg`` bytes, then opened.
* ``inplace_flip`` / ``inplace_truncate``: a source opened on the clean shard and its first and
  last records read (their units decoded and kept where the shard is decoded unit by unit; a
  loader: its first batch delivered), then byte ``arg`` flipped *in place* (same inode; ``r+b``
  write) or the file truncated in place to ``arg`` bytes, then (direct) the first and last
  records read again (only units read before) and every record read again.
* ``swap_same_size``: a loader built on the clean shard, then the shard atomically replaced by a
  copy with byte ``arg`` flipped (same size, new inode), then the loader iterated.

Modes: ``pinned`` (``rd.pin`` on the clean bytes first, as a state saved on clean data would be)
or ``unpinned`` (never pinned clean: each case in a fresh folder, auto-pinned by
``rd.ArrowShards`` at the default settings, so the pin hashes whatever bytes are there).
Readers: ``direct`` (``take`` of every record and ``src[-1]``), ``fork`` / ``spawn`` (an
``rd.DataLoader`` with one worker of that start method, ``batch_size=512``, in order).

Outcomes: ``refused`` (an rd error), ``identical`` (every record equal to the clean file's, as
pyarrow reads it), ``wrong`` (other records: a failure where a clean pin exists),
``undetectable`` (other records from a never-pinned-clean, well-formed file: nothing could tell),
``crash`` (a loader worker died: ``rd.WorkerError``), ``non-rd:...``. The parent adds ``crash``
(this process died) and ``hang`` (no line in time).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import resumable_data as rd


def rows_collate(rows):
    return rows


def true_rows(path: Path) -> list:
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    data = path.read_bytes()
    reader = pa.ipc.open_file(data) if data[:6] == b"ARROW1" else pa.ipc.open_stream(data)
    return reader.read_all().to_pylist()


def read_direct(src) -> list:
    rows = src.take(list(range(len(src)))).to_pylist()
    if rows:
        assert src[len(src) - 1] == rows[-1]
    return rows


def mutate(target: Path, attack: str, arg: int, clean: bytes) -> None:
    if attack == "inplace_flip":
        with open(target, "r+b") as f:
            f.seek(arg)
            f.write(bytes([clean[arg] ^ 0xFF]))
    elif attack == "inplace_truncate":
        os.truncate(target, arg)
    elif attack == "swap_same_size":
        data = bytearray(clean)
        data[arg] ^= 0xFF
        tmp = target.with_name(".swap.tmp")
        tmp.write_bytes(bytes(data))
        os.replace(tmp, target)


def run_case(folder: Path, name: str, clean: bytes, clean_rows: list, attack: str, mode: str, reader: str,
             arg: int) -> str:
    target = folder / name
    target.write_bytes(clean)
    past = os.stat(target).st_mtime_ns - 10 * 10**9  # a real dataset is not rewritten in the tick it was written
    os.utime(target, ns=(past, past))
    if mode == "pinned":
        rd.pin(folder)
    if attack in ("flip", "truncate"):
        data = bytearray(clean)
        if attack == "flip":
            data[arg] ^= 0xFF
        else:
            del data[arg:]
        tmp = folder / ".flip.tmp"
        tmp.write_bytes(bytes(data))
        os.replace(tmp, target)
    try:
        src = rd.ArrowShards(folder)
        if reader == "direct":
            if attack.startswith("inplace"):  # running: the first and last records read, the rest not yet
                ends = [clean_rows[0], clean_rows[-1]]
                assert src.take([0, len(src) - 1]).to_pylist() == ends
                mutate(target, attack, arg, clean)
                if src.take([0, len(src) - 1]).to_pylist() != ends:  # the units read (and kept) before
                    return "wrong"
            rows = read_direct(src)
        else:
            loader = rd.DataLoader(src, batch_size=512, num_workers=1, multiprocessing_context=reader,
                                   seed=0, collate_fn=rows_collate, timeout=150)
            it = iter(loader)
            if attack == "swap_same_size":
                mutate(target, attack, arg, clean)
                rows = []
            else:
                rows = list(next(it))
                mutate(target, attack, arg, clean)
            for batch in it:
                rows.extend(batch)
    except rd.WorkerError as exc:
        return f"crash:WorkerError:{str(exc)[:100]}"
    except rd.ResumableDataError:
        return "refused"
    except BaseException as exc:  # noqa: BLE001 - every non-rd exception is a failure
        return f"non-rd:{type(exc).__name__}:{str(exc)[:120]}"
    if rows == clean_rows:
        return "identical"
    return "undetectable" if mode == "unpinned" and attack in ("flip", "truncate") else "wrong"


def main() -> None:
    job = json.load(sys.stdin)
    work, clean_path, name = Path(job["work"]), Path(job["clean"]), job["name"]
    clean = clean_path.read_bytes()
    clean_rows = true_rows(clean_path)
    for i, (attack, mode, reader, arg) in enumerate(job["cases"]):
        folder = work / f"case{i}"
        folder.mkdir(parents=True)
        outcome = run_case(folder, name, clean, clean_rows, attack, mode, reader, arg)
        shutil.rmtree(folder, ignore_errors=True)
        print(json.dumps([attack, mode, reader, arg, outcome]), flush=True)


if __name__ == "__main__":
    main()
