"""Sequence packing as a pure function of (dataset version, seed, order, packing spec, sequence).

Algorithm. An epoch's documents, in plan order, are cut into windows of ``window`` documents and
each window is packed on its own, so packing one needs only its documents' lengths and tokens:

* ``concat``: the window's documents are joined (an EOS after each when ``eos_id`` is set) into
  one token stream, cut into ``seq_len``-token sequences; sequence ``j`` reads stream tokens
  ``[j*L, j*L + L]`` (one more for the last label); the window's last sequence is padded.
* ``best_fit``: best-fit decreasing bin packing of the window's documents into bins of
  ``seq_len`` tokens (ties broken by window order, so the result is deterministic); a document
  longer than ``seq_len`` is split into ``seq_len``-token pieces (``overlong="split"``) or refused
  (``overlong="error"``). Each bin is one sequence, padded to ``seq_len``.

The per-epoch index is the number of sequences each window yields (:func:`window_counts`),
computed from document lengths only (a list column's offsets: no token reads), so sequence ``j``
of an epoch is found by a binary search over its cumulative counts.

Guarantee. Over an epoch every token of every document appears exactly once as an input, in
document order; the output depends only on the inputs above. Cost: building an epoch's index is
O(documents) vectorized (compiled for ``best_fit``) and its result is O(documents / window);
a restore rebuilds (or loads from cache) one epoch's index, whatever the step.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from resumable_data._schema import (
    check_int,
    coerce_enum,
    expect_bool,
    expect_enum,
    expect_int,
    expect_mapping,
    expect_str,
)
from resumable_data.errors import ConfigError, ResumeError, describe

__all__ = [
    "IGNORE_INDEX",
    "Overlong",
    "PackMode",
    "Packing",
    "assemble",
    "best_fit_bins",
    "sequence_segments",
    "window_counts",
]

IGNORE_INDEX = -100

K_SEQ_LEN = "seq_len"
K_MODE = "mode"
K_WINDOW = "window"
K_TOKENS = "tokens"
K_EOS = "eos_id"
K_PAD = "pad_id"
K_OVERLONG = "overlong"
K_MASK = "mask_across_documents"
_KEYS = frozenset({K_SEQ_LEN, K_MODE, K_WINDOW, K_TOKENS, K_EOS, K_PAD, K_OVERLONG, K_MASK})


class PackMode(str, enum.Enum):
    """How a window's documents become sequences."""

    CONCAT = "concat"
    BEST_FIT = "best_fit"


class Overlong(str, enum.Enum):
    """What happens to a document longer than ``seq_len``: ``split`` (``best_fit`` cuts it into
    ``seq_len``-token pieces; ``concat`` cuts every document at sequence boundaries anyway) or
    ``error`` (refused at construction, in both modes)."""

    SPLIT = "split"
    ERROR = "error"


@dataclass(frozen=True)
class Packing:
    """A packing spec; pass it as ``rd.DataLoader(source, packing=rd.Packing(2048), batch_size=B)``.

    ``labels`` are the next token, ``-100`` on padding and, with ``mask_across_documents`` (the
    default), where the next token belongs to another document. ``pad_id`` fills ``input_ids``
    past the end of a window's stream or a bin.
    """

    seq_len: int
    mode: PackMode = PackMode.CONCAT
    window: int = 1024
    tokens: str = "tokens"
    eos_id: int | None = None
    pad_id: int = 0
    overlong: Overlong = Overlong.SPLIT
    mask_across_documents: bool = True

    def __post_init__(self) -> None:
        check_int(self.seq_len, "seq_len", 2, 1 << 24)
        check_int(self.window, "window", 1, 1 << 24)
        object.__setattr__(self, "mode", coerce_enum(self.mode, PackMode, "mode"))
        object.__setattr__(self, "overlong", coerce_enum(self.overlong, Overlong, "overlong"))
        if not isinstance(self.tokens, str) or not self.tokens:
            raise ConfigError(
                describe("tokens", self.tokens, "the name of a list<int> column", "pass tokens='input_ids'")
            )
        if self.eos_id is not None:
            check_int(self.eos_id, "eos_id", -(1 << 62), 1 << 62)
        check_int(self.pad_id, "pad_id", -(1 << 62), 1 << 62)
        if not isinstance(self.mask_across_documents, bool):
            raise ConfigError(
                describe("mask_across_documents", self.mask_across_documents, "True or False", "pass a bool")
            )

    def to_dict(self) -> dict[str, Any]:
        """The packing spec as the state's JSON object (every field; enums by value)."""
        return {
            K_SEQ_LEN: self.seq_len,
            K_MODE: self.mode.value,
            K_WINDOW: self.window,
            K_TOKENS: self.tokens,
            K_EOS: self.eos_id,
            K_PAD: self.pad_id,
            K_OVERLONG: self.overlong.value,
            K_MASK: self.mask_across_documents,
        }

    @classmethod
    def from_dict(cls, d: Any, where: str = "packing") -> Packing:
        """The spec ``d`` (from :meth:`to_dict`) describes; ``where`` names it in errors.

        Raises :class:`rd.ResumeError` on other keys or a field of the wrong type or range."""
        expect_mapping(d, where, _KEYS)
        eos = d[K_EOS]
        try:
            return cls(
                seq_len=expect_int(d[K_SEQ_LEN], f"{where}.seq_len", 2, 1 << 24),
                mode=expect_enum(d[K_MODE], PackMode, f"{where}.mode"),
                window=expect_int(d[K_WINDOW], f"{where}.window", 1, 1 << 24),
                tokens=expect_str(d[K_TOKENS], f"{where}.tokens", max_len=256),
                eos_id=None if eos is None else expect_int(eos, f"{where}.eos_id", -(1 << 62), 1 << 62),
                pad_id=expect_int(d[K_PAD], f"{where}.pad_id", -(1 << 62), 1 << 62),
                overlong=expect_enum(d[K_OVERLONG], Overlong, f"{where}.overlong"),
                mask_across_documents=expect_bool(d[K_MASK], f"{where}.mask_across_documents"),
            )
        except ConfigError as e:
            raise ResumeError(str(e)) from None

    def doc_lengths(self, token_lengths: np.ndarray) -> np.ndarray:
        """Packed length of each document: its tokens plus the EOS when ``eos_id`` is set."""
        return token_lengths.astype(np.int64, copy=False) + (0 if self.eos_id is None else 1)


# -- best fit decreasing ---------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _bfd(lengths, cap):  # pragma: no cover - compiled
    """Best-fit decreasing over items ``lengths`` (each <= cap). Returns (bin of each item,
    number of bins). Bins with equal free space are chosen last-touched first; items are taken
    by decreasing length, ties by index, so the result is deterministic."""
    m = lengths.shape[0]
    order = np.argsort(-lengths, kind="mergesort")
    words = (cap + 64) // 64
    bits = np.zeros(words, dtype=np.uint64)
    head = np.full(cap + 1, -1, dtype=np.int64)  # per free-space value, a stack of bins
    nxt = np.full(m, -1, dtype=np.int64)
    free = np.zeros(m, dtype=np.int64)
    item_bin = np.empty(m, dtype=np.int64)
    nbins = 0
    for t in range(m):
        i = order[t]
        s = lengths[i]
        # smallest free space >= s that some bin has
        found = -1
        w = s // 64
        word = bits[w] & ~((np.uint64(1) << np.uint64(s % 64)) - np.uint64(1))
        while True:
            if word != 0:
                low = 0
                while (word >> np.uint64(low)) & np.uint64(1) == 0:
                    low += 1
                found = w * 64 + low
                break
            w += 1
            if w >= words:
                break
            word = bits[w]
        if found == -1:
            b = nbins
            nbins += 1
            rest = cap - s
        else:
            b = head[found]
            head[found] = nxt[b]
            if head[found] == -1:
                bits[found // 64] &= ~(np.uint64(1) << np.uint64(found % 64))
            rest = found - s
        item_bin[i] = b
        free[b] = rest
        nxt[b] = head[rest]
        head[rest] = b
        bits[rest // 64] |= np.uint64(1) << np.uint64(rest % 64)
    return item_bin, nbins


@njit(cache=True, nogil=True)
def _bfd_counts(lengths, starts, cap):  # pragma: no cover - compiled
    out = np.empty(starts.shape[0] - 1, dtype=np.int64)
    for w in range(starts.shape[0] - 1):
        out[w] = _bfd(lengths[starts[w] : starts[w + 1]], cap)[1]
    return out


def _pieces(doc_lengths: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split documents longer than ``cap`` into ``cap``-sized pieces: (doc, start, length) per piece."""
    n_pieces = np.maximum(1, -(-doc_lengths // cap))
    doc = np.repeat(np.arange(len(doc_lengths)), n_pieces)
    first = np.cumsum(n_pieces) - n_pieces
    k = np.arange(len(doc)) - np.repeat(first, n_pieces)
    start = k * cap
    length = np.minimum(cap, doc_lengths[doc] - start)
    return doc, start, length


def best_fit_bins(doc_lengths: np.ndarray, spec: Packing) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One window's best-fit packing: per piece (doc index, start in doc, length, bin), pieces
    sorted by (bin, placement order). Documents longer than ``seq_len`` are split into pieces."""
    doc, start, length = _pieces(np.asarray(doc_lengths, dtype=np.int64), spec.seq_len)
    item_bin, _ = _bfd(length, spec.seq_len)
    placement = np.lexsort((np.arange(len(length)), -length))  # the order items were placed in
    rank = np.empty_like(placement)
    rank[placement] = np.arange(len(placement))
    order = np.lexsort((rank, item_bin))
    return doc[order], start[order], length[order], item_bin[order]


def window_counts(doc_lengths_in_order: np.ndarray, spec: Packing) -> np.ndarray:
    """Sequences each window of an epoch yields, from the documents' packed lengths in plan order."""
    lengths = np.asarray(doc_lengths_in_order, dtype=np.int64)
    starts = np.arange(0, len(lengths), spec.window, dtype=np.int64)
    if spec.mode is PackMode.CONCAT:
        totals = np.add.reduceat(lengths, starts) if len(lengths) else np.zeros(0, dtype=np.int64)
        return -(-totals // spec.seq_len)
    doc, _, length = _pieces(lengths, spec.seq_len)
    piece_starts = np.searchsorted(doc, starts)
    bounds = np.append(piece_starts, len(length)).astype(np.int64)
    return _bfd_counts(length, bounds, spec.seq_len)


def sequence_segments(doc_lengths: np.ndarray, spec: Packing, sequences: np.ndarray) -> tuple[np.ndarray, ...]:
    """Where the tokens of a window's ``sequences`` come from.

    Returns arrays over segments: (row in ``sequences``, document index in the window, start in
    the document, length, column in the row). Concat rows have ``seq_len + 1`` columns (the
    extra one feeds the last label); best-fit rows have ``seq_len``.
    """
    lengths = np.asarray(doc_lengths, dtype=np.int64)
    L = spec.seq_len
    rows, docs, starts, lens, cols = [], [], [], [], []
    if spec.mode is PackMode.CONCAT:
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        total = int(bounds[-1])
        for r, j in enumerate(np.asarray(sequences).tolist()):
            a, b = j * L, min(j * L + L + 1, total)
            first = int(np.searchsorted(bounds, a, side="right")) - 1
            last = int(np.searchsorted(bounds, b, side="left"))
            d = np.arange(first, last)
            s = np.maximum(a, bounds[d]) - bounds[d]
            e = np.minimum(b, bounds[d + 1]) - bounds[d]
            rows.append(np.full(len(d), r))
            docs.append(d)
            starts.append(s)
            lens.append(e - s)
            cols.append(bounds[d] + s - a)
    else:
        doc, start, length, bin_ = best_fit_bins(lengths, spec)
        first_in_bin = np.searchsorted(bin_, np.asarray(sequences))
        last_in_bin = np.searchsorted(bin_, np.asarray(sequences), side="right")
        for r, (i0, i1) in enumerate(zip(first_in_bin.tolist(), last_in_bin.tolist())):
            ln = length[i0:i1]
            rows.append(np.full(i1 - i0, r))
            docs.append(doc[i0:i1])
            starts.append(start[i0:i1])
            lens.append(ln)
            cols.append(np.cumsum(ln) - ln)
    cat = lambda xs: np.concatenate(xs).astype(np.int64) if xs else np.zeros(0, np.int64)
    return cat(rows), cat(docs), cat(starts), cat(lens), cat(cols)


def assemble(
    spec: Packing,
    n_rows: int,
    segments: tuple[np.ndarray, ...],
    flat_tokens: np.ndarray,
    doc_offsets: np.ndarray,
    doc_ids: np.ndarray,
) -> dict[str, np.ndarray]:
    """Build packed rows from ``segments`` (see :func:`sequence_segments`).

    ``flat_tokens[doc_offsets[d]:doc_offsets[d + 1]]`` are the raw tokens of window document
    ``d`` (no EOS); ``doc_ids[d]`` is its record id. Returns numpy arrays ``input_ids``,
    ``labels``, ``position_ids`` (offset within the document), ``document_ids`` (record id, -1
    on padding) of shape ``[n_rows, seq_len]``, and ``real_tokens`` per row.
    """
    L = spec.seq_len
    width = L + 1 if spec.mode is PackMode.CONCAT else L
    rows, docs, starts, lens, cols = segments
    dtype = flat_tokens.dtype if flat_tokens.size else np.int64
    tok = np.full((n_rows, width), spec.pad_id, dtype=np.int64)
    doc = np.full((n_rows, width), -1, dtype=np.int64)
    occ = np.full((n_rows, width), -1, dtype=np.int64)  # window document index: repeated records differ
    pos = np.zeros((n_rows, width), dtype=np.int64)
    total = int(lens.sum())
    if total:
        seg = np.repeat(np.arange(len(lens)), lens)
        off = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
        t = starts[seg] + off
        d = docs[seg]
        raw_len = doc_offsets[d + 1] - doc_offsets[d]
        is_eos = t >= raw_len
        src = np.minimum(doc_offsets[d] + t, max(flat_tokens.size - 1, 0))
        values = flat_tokens[src] if flat_tokens.size else np.zeros(total, dtype=np.int64)
        if spec.eos_id is not None:
            values = np.where(is_eos, spec.eos_id, values)
        flat_index = rows[seg] * width + cols[seg] + off
        tok.reshape(-1)[flat_index] = values
        doc.reshape(-1)[flat_index] = doc_ids[d]
        occ.reshape(-1)[flat_index] = d
        pos.reshape(-1)[flat_index] = t
    if spec.mode is PackMode.CONCAT:
        nxt, nxt_occ = tok[:, 1:], occ[:, 1:]
        tok, doc, occ, pos = tok[:, :L], doc[:, :L], occ[:, :L], pos[:, :L]
    else:
        nxt = np.concatenate([tok[:, 1:], np.full((n_rows, 1), spec.pad_id)], axis=1)
        nxt_occ = np.concatenate([occ[:, 1:], np.full((n_rows, 1), -1)], axis=1)
    valid = (occ >= 0) & (nxt_occ >= 0)
    if spec.mask_across_documents:  # by window document, not record id: a record may repeat back to back
        valid &= nxt_occ == occ
    labels = np.where(valid, nxt, IGNORE_INDEX)
    return {
        "input_ids": tok.astype(dtype, copy=False) if np.issubdtype(dtype, np.integer) else tok,
        "labels": labels,
        "position_ids": pos,
        "document_ids": doc,
        "real_tokens": (doc >= 0).sum(axis=1),
    }
