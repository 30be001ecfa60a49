"""The progress record of an unfinished ``rd.prepare``: ``<out>/.rd-prepare.json``.

Algorithm: a JSON object (``format``, integer ``schema_version``) holding the run's lineage, the
number of planned pieces and, per completed piece, what its worker reported (shard file name or
null when every record was dropped, byte size, xxh3-128, rows, records read, tokens, input bytes).
The driver rewrites it atomically (:meth:`ShardStore.write_atomic`) after every completed piece;
workers never touch it. The name starts with a dot, so shard discovery never lists it.

Guarantee: a piece listed here was renamed into place before it was recorded; on restart,
:meth:`Progress.verified` keeps only the pieces whose file (the piece's own shard name) still has
the recorded size and content hash, and the all-dropped pieces whose shard file is absent, so a
damaged, missing or mis-named shard is redone. A record of another lineage is refused. An entry
forged with the size and hash of other bytes is not detected (that would mean redoing the piece).

Cost: one small JSON write per completed piece (O(pieces) bytes); the restart check hashes each
completed shard once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from resumable_data._schema import expect_header, expect_int, expect_mapping, field_int
from resumable_data.errors import DatasetIntegrityError, describe
from resumable_data.sources.prepare.tasks import PieceResult, shard_name, write_error
from resumable_data.sources.store import ShardStore, join

__all__ = ["PROGRESS_NAME", "Progress"]

PROGRESS_NAME = ".rd-prepare.json"
FORMAT = "resumable_data.prepare_progress"
SCHEMA_VERSION = 1
K_FORMAT, K_SCHEMA_VERSION, K_LINEAGE, K_PIECES, K_DONE = "format", "schema_version", "lineage", "pieces", "done"
_KEYS = frozenset({K_FORMAT, K_SCHEMA_VERSION, K_LINEAGE, K_PIECES, K_DONE})
_RESULT_KEYS = frozenset({"index", "name", "size", "content_hash", "rows", "records_in", "tokens", "bytes_in"})


def _result_to_dict(r: PieceResult) -> dict[str, Any]:
    return {k: getattr(r, k) for k in sorted(_RESULT_KEYS)}


def _result_from_dict(d: Any, where: str) -> PieceResult:
    d = expect_mapping(d, where, _RESULT_KEYS, error=DatasetIntegrityError)
    name, h = d["name"], d["content_hash"]
    if not (name is None or isinstance(name, str)) or not (h is None or isinstance(h, str)):
        raise DatasetIntegrityError(
            describe(where, d, "name and content_hash strings or null", "delete the folder and prepare again")
        )
    ints = {
        k: field_int(d, k, where, error=DatasetIntegrityError)
        for k in ("index", "size", "rows", "records_in", "tokens", "bytes_in")
    }
    return PieceResult(name=name, content_hash=h, **ints)


@dataclass
class Progress:
    """Completed pieces of one prepare run (mutable: the driver adds to it)."""

    lineage: dict[str, Any]
    pieces: int
    done: dict[int, PieceResult] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            K_FORMAT: FORMAT,
            K_SCHEMA_VERSION: SCHEMA_VERSION,
            K_LINEAGE: self.lineage,
            K_PIECES: self.pieces,
            K_DONE: [_result_to_dict(self.done[i]) for i in sorted(self.done)],
        }

    @classmethod
    def from_dict(cls, d: Any, where: str) -> Progress:
        d = expect_mapping(d, where, _KEYS, error=DatasetIntegrityError)
        expect_header(d, FORMAT, SCHEMA_VERSION, where, error=DatasetIntegrityError)
        pieces = expect_int(d[K_PIECES], f"{where}.pieces", error=DatasetIntegrityError)
        if not isinstance(d[K_LINEAGE], dict) or not isinstance(d[K_DONE], list):
            raise DatasetIntegrityError(
                describe(where, "lineage/done", "an object and a list", "delete the folder and prepare again")
            )
        done = [_result_from_dict(r, f"{where}.done[]") for r in d[K_DONE]]
        return cls(d[K_LINEAGE], pieces, {r.index: r for r in done})

    @classmethod
    def load(cls, store: ShardStore, out: str) -> Progress | None:
        path = join(out, PROGRESS_NAME)
        data = store.read_small(path, 256 << 20)
        if data is None:
            return None
        try:
            return cls.from_dict(json.loads(data.decode("utf-8")), path)
        except (UnicodeDecodeError, ValueError, DatasetIntegrityError) as exc:
            raise DatasetIntegrityError(
                describe(
                    "out",
                    out,
                    f"a readable progress record of an interrupted rd.prepare in {PROGRESS_NAME} ({exc})",
                    f"delete the folder {out!r} and prepare again",
                )
            ) from None

    def save(self, store: ShardStore, out: str) -> None:
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode("utf-8")
        try:
            store.write_atomic(join(out, PROGRESS_NAME), text)
        except OSError as exc:  # no space, read-only: the previous record stays whole
            raise write_error(out, exc) from None

    def verified(self, store: ShardStore, out: str) -> dict[int, PieceResult]:
        """The completed pieces whose shard file is intact (size and content hash)."""
        ok = {}
        for i, r in self.done.items():
            if i >= self.pieces:
                continue
            name = shard_name(i, self.pieces)  # an entry naming another file (edited) is redone
            st = store.stat(join(out, name))
            if r.name is None:
                if st is None:  # every record dropped: no file (a file there says otherwise)
                    ok[i] = r
                continue
            if (
                r.name == name
                and st is not None
                and st.size == r.size
                and store.hash_file(join(out, name)) == r.content_hash
            ):
                ok[i] = r
        return ok
