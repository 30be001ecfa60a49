"""Worker of ``test_byte_flips.py`` (run as a script, never imported by pytest).

Reads one JSON job on stdin: ``{"clean": path, "name": shard file name, "work": dir, "cases":
[[offset, xor], ...], "via_filesystem": bool}`` (True: every read goes through
``filesystem=pyarrow.fs.LocalFileSystem()``, the code path of remote stores). For each case it writes the clean shard with one byte flipped into
``work/<name>`` (a fresh inode, next to the clean version's manifest), then reads it at the
default settings and at ``verify="size"`` (structural validation only), and prints one JSON line
per case (flushed) so that the parent knows which case a crash or hang belongs to.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import resumable_data as rd


def outcome(work: Path, clean_rows: list, **kw) -> str:
    try:
        src = rd.ArrowShards(work, **kw)
        rows = src.take(list(range(len(src)))).to_pylist()
    except rd.ResumableDataError:
        return "refused"
    except BaseException as exc:  # noqa: BLE001 - every non-rd exception is a failure
        return f"non-rd:{type(exc).__name__}:{str(exc)[:120]}"
    return "identical" if rows == clean_rows else "wrong"


def main() -> None:
    job = json.load(sys.stdin)
    work, clean = Path(job["work"]), Path(job["clean"]).read_bytes()
    fs = {}
    if job.get("via_filesystem"):  # the remote store's code path (no memory map), on local files
        import pyarrow.fs as pafs

        fs = {"filesystem": pafs.LocalFileSystem()}
    target = work / job["name"]
    target.write_bytes(clean)
    rd.pin(work, **fs)  # pinned on the clean bytes, as a state saved on clean data would be
    clean_rows = rd.ArrowShards(work, **fs).take(list(range(len(rd.ArrowShards(work, **fs))))).to_pylist()
    for offset, xor in job["cases"]:
        data = bytearray(clean)
        data[offset] ^= xor
        tmp = work / ".flip.tmp"
        tmp.write_bytes(bytes(data))
        os.replace(tmp, target)
        default = outcome(work, clean_rows, **fs)
        size = outcome(work, clean_rows, verify="size", **fs)
        print(json.dumps([offset, xor, default, size]), flush=True)


if __name__ == "__main__":
    main()
